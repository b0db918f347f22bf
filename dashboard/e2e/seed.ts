// Seeds a running `rollouthub store` through its REST API with rollouts, attempts, spans, resources and workers.
import { randomBytes } from 'node:crypto';

export interface SeedResult {
  rollouts: Record<string, { rolloutId: string; attemptIds: string[]; mode: string | null; status: string }>;
  resourcesIds: string[];
  workerIds: string[];
}

type Json = Record<string, unknown>;

export class Rest {
  constructor(readonly base: string, readonly token?: string) {}

  async call(method: string, path: string, body?: unknown): Promise<any> {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (this.token) headers.authorization = `Bearer ${this.token}`;
    const res = await fetch(`${this.base}/v1/agl${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    if (!res.ok) throw new Error(`${method} ${path} -> ${res.status}: ${text}`);
    return text ? JSON.parse(text) : null;
  }
}

const hex = (n: number) => randomBytes(n).toString('hex');

interface SpanSpec {
  name: string;
  parent?: string; // key of the parent span
  key: string;
  start: number; // seconds from the attempt base time
  end: number | null;
  status?: 'OK' | 'ERROR' | 'UNSET';
  attributes?: Json;
}

async function addSpans(rest: Rest, rolloutId: string, attemptId: string, base: number, specs: SpanSpec[]): Promise<void> {
  const traceId = hex(16);
  const ids: Record<string, string> = {};
  for (const s of specs) ids[s.key] = hex(8);
  for (const s of specs) {
    const { sequence_id } = await rest.call('POST', '/spans/next', { rollout_id: rolloutId, attempt_id: attemptId });
    const parentId = s.parent ? ids[s.parent] : null;
    await rest.call('POST', '/spans', {
      rollout_id: rolloutId,
      attempt_id: attemptId,
      sequence_id,
      trace_id: traceId,
      span_id: ids[s.key],
      parent_id: parentId,
      name: s.name,
      status: { status_code: s.status ?? 'OK', description: s.status === 'ERROR' ? 'tool failed' : null },
      attributes: s.attributes ?? {},
      events: [],
      links: [],
      start_time: base + s.start,
      end_time: s.end === null ? null : base + s.end,
      context: { trace_id: traceId, span_id: ids[s.key], is_remote: false, trace_state: {} },
      parent: parentId ? { trace_id: traceId, span_id: parentId, is_remote: false, trace_state: {} } : null,
      resource: { attributes: { 'service.name': 'e2e-agent' }, schema_url: '' },
    });
  }
}

function agentSpans(reward: number | null, opts: { error?: boolean; open?: boolean } = {}): SpanSpec[] {
  const specs: SpanSpec[] = [
    { key: 'root', name: 'agent_execution', start: 0, end: opts.open ? null : 4, attributes: { 'agent.name': 'sql-agent' } },
    { key: 'llm', parent: 'root', name: 'llm_call', start: 0.2, end: 1.6, attributes: { 'gen_ai.request.model': 'tiny-model', 'gen_ai.prompt.0.role': 'user', 'gen_ai.prompt.0.content': 'What is 2+2?', 'gen_ai.completion.0.role': 'assistant', 'gen_ai.completion.0.content': '4', 'gen_ai.usage.prompt_tokens': 12, 'gen_ai.usage.completion_tokens': 3, 'gen_ai.usage.total_tokens': 15 } },
    { key: 'tool', parent: 'root', name: 'tool_execution', start: 1.8, end: 3.1, status: opts.error ? 'ERROR' : 'OK', attributes: { 'tool.name': 'calculator', 'tool.args': '{"a":2,"b":2}' } },
    { key: 'sub', parent: 'tool', name: 'http_request', start: 2.0, end: 2.7, attributes: { 'http.method': 'GET' } },
  ];
  if (reward !== null) {
    specs.push({ key: 'reward', parent: 'root', name: 'agentlightning.annotation', start: 3.5, end: 3.5, attributes: { 'agentlightning.reward.0.name': 'primary', 'agentlightning.reward.0.value': reward } });
  }
  return specs;
}

async function enqueue(rest: Rest, task: string, mode: string | null, resourcesId: string | null, config?: Json): Promise<string> {
  const [r] = await rest.call('POST', '/queues/rollouts/enqueue', {
    rollouts: [{ input: { task, question: `Question for ${task}` }, mode, resources_id: resourcesId, config, metadata: { seed: 'e2e' } }],
  });
  return r.rollout_id;
}

async function dequeue(rest: Rest, workerId: string): Promise<{ rolloutId: string; attemptId: string }> {
  const items = await rest.call('POST', '/queues/rollouts/dequeue', { limit: 1, worker_id: workerId });
  if (!items.length) throw new Error('nothing to dequeue');
  return { rolloutId: items[0].rollout_id, attemptId: items[0].attempt.attempt_id };
}

async function finish(rest: Rest, rolloutId: string, attemptId: string, status: string): Promise<void> {
  await rest.call('POST', `/rollouts/${rolloutId}/attempts/${attemptId}`, { status });
}

export async function seed(rest: Rest): Promise<SeedResult> {
  const now = Date.now() / 1000;
  // Resources: 4 snapshots with stable ids, one updated to version 2.
  const llm = (model: string) => ({ resource_type: 'llm', endpoint: 'http://127.0.0.1:9/v1', model, sampling_parameters: { temperature: 0.7 } });
  const prompt = (engine: string, template: string) => ({ resource_type: 'prompt_template', template, engine });
  const resourcesIds = ['rs-e2e-001', 'rs-e2e-002', 'rs-e2e-003', 'rs-e2e-004'];
  await rest.call('POST', `/resources/${resourcesIds[0]}`, { main_llm: llm('tiny-model') });
  await rest.call('POST', `/resources/${resourcesIds[1]}`, { main_llm: llm('tiny-model'), system_prompt: prompt('f-string', 'You are {role}.') });
  await rest.call('POST', `/resources/${resourcesIds[2]}`, { judge: llm('judge-model'), user_prompt: prompt('jinja', 'Solve {{ task }}') });
  await rest.call('POST', `/resources/${resourcesIds[1]}`, { main_llm: llm('tiny-model-v2'), system_prompt: prompt('f-string', 'You are {role}!') });
  await rest.call('POST', `/resources/${resourcesIds[3]}`, {});

  const rollouts: SeedResult['rollouts'] = {};
  const remember = (key: string, rolloutId: string, attemptIds: string[], mode: string | null, status: string) => {
    rollouts[key] = { rolloutId, attemptIds, mode, status };
  };

  // Finished rollouts with rewards, each handled by a worker.
  const finished: [string, string, string, string, number, boolean][] = [
    ['alpha', 'train', 'Worker-0', 'succeeded', 0.8, false],
    ['bravo', 'val', 'Worker-1', 'succeeded', 0.4, false],
    ['charlie', 'test', 'Worker-2', 'failed', 0.1, true],
    ['india', 'train', 'Worker-1', 'succeeded', 0.6, false],
  ];
  for (const [key, mode, worker, status, reward, error] of finished) {
    const id = await enqueue(rest, key, mode, resourcesIds[1], undefined);
    const d = await dequeue(rest, worker);
    await addSpans(rest, id, d.attemptId, now - 60, agentSpans(reward, { error }));
    await finish(rest, id, d.attemptId, status);
    remember(key, id, [d.attemptId], mode, status);
  }

  // A retried rollout: attempt 1 fails, attempt 2 succeeds.
  const deltaId = await enqueue(rest, 'delta', 'val', resourcesIds[2], { max_attempts: 2, retry_condition: ['failed'] });
  const d1 = await dequeue(rest, 'Worker-0');
  await addSpans(rest, deltaId, d1.attemptId, now - 50, agentSpans(null, { error: true }));
  await finish(rest, deltaId, d1.attemptId, 'failed');
  const d2 = await dequeue(rest, 'Worker-2');
  await addSpans(rest, deltaId, d2.attemptId, now - 40, agentSpans(1.0));
  await finish(rest, deltaId, d2.attemptId, 'succeeded');
  remember('delta', deltaId, [d1.attemptId, d2.attemptId], 'val', 'succeeded');

  // A running rollout with an open root span.
  const echoId = await enqueue(rest, 'echo', 'train', resourcesIds[0]);
  const e = await dequeue(rest, 'Worker-3');
  await addSpans(rest, echoId, e.attemptId, now - 5, agentSpans(null, { open: true }).slice(0, 2));
  remember('echo', echoId, [e.attemptId], 'train', 'running');

  // Queued and cancelled rollouts.
  remember('foxtrot', await enqueue(rest, 'foxtrot', 'val', null), [], 'val', 'queuing');
  const golfId = await enqueue(rest, 'golf', 'test', null);
  await rest.call('POST', `/rollouts/${golfId}`, { status: 'cancelled' });
  remember('golf', golfId, [], 'test', 'cancelled');
  remember('hotel', await enqueue(rest, 'hotel', null, null), [], null, 'queuing');

  // Worker heartbeats (system snapshots), with the interval runners report. Worker-4 exited cleanly (its last
  // heartbeat says "stopped"); Worker-5 crashed: its heartbeats, due every 0.5 s, stopped coming.
  const workerIds = ['Worker-0', 'Worker-1', 'Worker-2', 'Worker-3', 'Worker-4', 'Worker-5'];
  for (const [i, w] of workerIds.slice(0, 4).entries()) {
    await rest.call('POST', `/workers/${w}`, { heartbeat_stats: { queue_depth: i, gpu_utilization: 0.25 * i, cpu_percent: 10 + i, hostname: `runner-${i}`, heartbeat_interval: 600 } });
  }
  await rest.call('POST', '/workers/Worker-4', { heartbeat_stats: { runner_state: 'stopped', heartbeat_interval: 600, hostname: 'runner-4' } });
  await rest.call('POST', '/workers/Worker-5', { heartbeat_stats: { heartbeat_interval: 0.5, hostname: 'runner-5' } });
  return { rollouts, resourcesIds, workerIds };
}

/** One finished rollout per entry: resources id, mode and final reward. */
export interface RewardedRollout {
  resourcesId: string;
  mode: 'train' | 'val';
  reward: number;
}

/**
 * Seed finished rollouts with final rewards (a reward span each), in bulk: the resources versions first (in the
 * given order, which is their creation order), then one enqueue and one dequeue for all rollouts, then the spans and
 * the final statuses, a few requests in flight at a time.
 */
export async function seedRewards(rest: Rest, versions: string[], rollouts: RewardedRollout[]): Promise<void> {
  for (const v of versions) await rest.call('POST', `/resources/${v}`, { prompt: { resource_type: 'prompt_template', template: `prompt of ${v}`, engine: 'f-string' } });
  const queued: { rollout_id: string }[] = await rest.call('POST', '/queues/rollouts/enqueue', {
    rollouts: rollouts.map((r, i) => ({ input: { task: `task-${i}` }, mode: r.mode, resources_id: r.resourcesId })),
  });
  const dequeued: { rollout_id: string; attempt: { attempt_id: string } }[] = await rest.call('POST', '/queues/rollouts/dequeue', {
    limit: rollouts.length, worker_id: 'Worker-runs',
  });
  const attempts = new Map(dequeued.map((d) => [d.rollout_id, d.attempt.attempt_id]));
  const now = Date.now() / 1000;
  const finishOne = async (i: number) => {
    const rolloutId = queued[i].rollout_id;
    const attemptId = attempts.get(rolloutId)!;
    await addSpans(rest, rolloutId, attemptId, now - 30, agentSpans(rollouts[i].reward).filter((s) => s.key === 'root' || s.key === 'reward'));
    await rest.call('POST', `/rollouts/${rolloutId}/attempts/${attemptId}`, { status: 'succeeded' });
  };
  let next = 0;
  await Promise.all(Array.from({ length: 6 }, async () => {
    while (next < rollouts.length) await finishOne(next++);
  }));
}

export { addSpans, agentSpans, enqueue };
