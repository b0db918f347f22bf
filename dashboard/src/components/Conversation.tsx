// A rollout's conversation: its LLM calls (messages, responses, tool calls, token counts), the way LLM trace viewers
// show calls instead of bare span names. Served by the store from the same adapter as `rollouthub export messages`.
import { formatSpanDuration } from '../api/format';
import { fetchConversation, formatReward, type ChatMessage, type LlmCall } from '../api/training';
import type { Rollout } from '../api/types';
import { useQuery } from '../hooks/useQuery';
import { getErrorDescriptor } from '../api/client';
import { useConfig } from '../state/config';

function contentText(content: unknown): string {
  if (content === null || content === undefined) return '';
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .map((part) => (part && typeof part === 'object' && 'text' in part ? String((part as { text: unknown }).text) : JSON.stringify(part)))
      .join('\n');
  }
  return JSON.stringify(content, null, 2);
}

function Message({ message }: { message: ChatMessage }) {
  const text = contentText(message.content);
  return (
    <div className={`chat-message role-${message.role}`} data-testid="chat-message" data-role={message.role}>
      <div className="chat-role small">
        {message.role}
        {message.tool_call_id && <span className="dim mono"> · result of {message.tool_call_id}</span>}
      </div>
      {text && <div className="chat-content">{text}</div>}
      {message.tool_calls?.map((call, i) => (
        <div className="tool-call mono small" key={call.id ?? i} data-testid="tool-call">
          → {call.function.name}({call.function.arguments ?? ''}){call.id ? <span className="dim"> [{call.id}]</span> : null}
        </div>
      ))}
    </div>
  );
}

function Call({ call, index }: { call: LlmCall; index: number }) {
  const duration = call.startTime !== null && call.endTime !== null ? call.endTime - call.startTime : null;
  return (
    <section className="llm-call card" data-testid="llm-call">
      <div className="row small">
        <strong>Call {index + 1}</strong>
        <span className="mono">{call.model ?? call.name}</span>
        <span className="spacer" />
        <span className="dim" data-testid="llm-call-tokens">
          {call.promptTokens ?? '?'} prompt + {call.completionTokens ?? '?'} completion tokens
          {call.totalTokens !== null ? ` = ${call.totalTokens}` : ''}
        </span>
        <span className="dim">{formatSpanDuration(duration)}</span>
      </div>
      {call.tools && call.tools.length > 0 && (
        <div className="small dim">Tools offered: {call.tools.map((t) => t.function.name).join(', ')}</div>
      )}
      <div className="chat-prompt">{call.prompt.map((m, i) => <Message key={i} message={m} />)}</div>
      <div className="chat-response" data-testid="llm-call-response">{call.response.map((m, i) => <Message key={i} message={m} />)}</div>
    </section>
  );
}

export function ConversationView({ rollout }: { rollout: Rollout }) {
  const { client, config } = useConfig();
  const q = useQuery(`conversation|${client.serverKey}|${config.token}|${rollout.rolloutId}|${rollout.attempt?.attemptId}`, (signal) =>
    fetchConversation(client, rollout.rolloutId, signal),
  );
  if (q.error) return <div className="alert-inline error" role="alert">Unable to load the conversation ({getErrorDescriptor(q.error) ?? 'error'}).</div>;
  if (!q.data) return <div className="dim small">Loading conversation…</div>;
  const { calls, reward } = q.data;
  return (
    <div className="conversation" data-testid="conversation">
      <div className="row">
        <span>Final reward</span>
        <span className="badge badge-violet" data-testid="conversation-reward">{formatReward(reward)}</span>
        <span className="dim small">{calls.length} LLM {calls.length === 1 ? 'call' : 'calls'} · same messages as <code>rollouthub export messages</code></span>
      </div>
      {calls.length === 0 ? <div className="dim">No LLM calls recorded for this rollout.</div> : calls.map((c, i) => <Call key={c.spanId} call={c} index={i} />)}
    </div>
  );
}
