"""Table rows: NUL characters and lone surrogates in every string of every JSON body, query and path parameter."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple
from urllib.parse import quote

from .case import NUL, SURROGATE, Case, j
from .live import legit_span


def _text_locations(ids: Dict[str, str]) -> List[Tuple[str, str, str, Callable[[str], Any], str]]:
    """``(label, method, path, body builder taking the hostile text, field the error must name)`` for every string of
    every JSON body."""
    rid, aid = ids["rollout_id"], ids["attempt_id"]

    def span(**changes: Any) -> Callable[[str], Any]:
        def build(text: str) -> Any:
            body = legit_span(rid, aid, sequence_id=7, span_id="00000000000000c1")
            for key, value in changes.items():
                body[key] = value(text) if callable(value) else value
            return body

        return build

    return [
        ("enqueue input", "POST", "/v1/agl/queues/rollouts/enqueue", lambda t: {"rollouts": [{"input": t}]}, "input"),
        (
            "enqueue nested input",
            "POST",
            "/v1/agl/queues/rollouts/enqueue",
            lambda t: {"rollouts": [{"input": {"q": ["ok", {"deep": t}]}}]},
            "deep",
        ),
        (
            "enqueue input key",
            "POST",
            "/v1/agl/queues/rollouts/enqueue",
            lambda t: {"rollouts": [{"input": {f"k{t}": 1}}]},
            "object key",
        ),
        (
            "enqueue metadata",
            "POST",
            "/v1/agl/queues/rollouts/enqueue",
            lambda t: {"rollouts": [{"input": 1, "metadata": {"m": t}}]},
            "metadata",
        ),
        (
            "enqueue resources_id",
            "POST",
            "/v1/agl/queues/rollouts/enqueue",
            lambda t: {"rollouts": [{"input": 1, "resources_id": t}]},
            "resources_id",
        ),
        ("start input", "POST", "/v1/agl/rollouts", lambda t: {"input": t}, "input"),
        ("start metadata key", "POST", "/v1/agl/rollouts", lambda t: {"input": 1, "metadata": {t: 1}}, "metadata"),
        ("start worker_id", "POST", "/v1/agl/rollouts", lambda t: {"input": 1, "worker_id": t}, "worker_id"),
        ("dequeue worker_id", "POST", "/v1/agl/queues/rollouts/dequeue", lambda t: {"worker_id": t}, "worker_id"),
        (
            "search rollout_id_contains",
            "POST",
            "/v1/agl/rollouts/search",
            lambda t: {"rollout_id_contains": t},
            "rollout_id_contains",
        ),
        ("search rollout_id_in", "POST", "/v1/agl/rollouts/search", lambda t: {"rollout_id_in": [t]}, "rollout_id_in"),
        ("update rollout input", "POST", f"/v1/agl/rollouts/{rid}", lambda t: {"input": {"a": t}}, "input"),
        ("update rollout metadata", "POST", f"/v1/agl/rollouts/{rid}", lambda t: {"metadata": {"a": t}}, "metadata"),
        (
            "update rollout resources_id",
            "POST",
            f"/v1/agl/rollouts/{rid}",
            lambda t: {"resources_id": t},
            "resources_id",
        ),
        (
            "start attempt worker_id",
            "POST",
            f"/v1/agl/rollouts/{rid}/attempts",
            lambda t: {"worker_id": t},
            "worker_id",
        ),
        (
            "update attempt worker_id",
            "POST",
            f"/v1/agl/rollouts/{rid}/attempts/latest",
            lambda t: {"worker_id": t},
            "worker_id",
        ),
        (
            "update attempt metadata",
            "POST",
            f"/v1/agl/rollouts/{rid}/attempts/{aid}",
            lambda t: {"metadata": {"note": t}},
            "metadata",
        ),
        (
            "heartbeat stats value",
            "POST",
            "/v1/agl/workers/seed-worker",
            lambda t: {"heartbeat_stats": {"cpu": t}},
            "heartbeat_stats",
        ),
        (
            "heartbeat stats key",
            "POST",
            "/v1/agl/workers/seed-worker",
            lambda t: {"heartbeat_stats": {t: 1}},
            "heartbeat_stats",
        ),
        (
            "search workers worker_id_contains",
            "POST",
            "/v1/agl/workers/search",
            lambda t: {"worker_id_contains": t},
            "worker_id_contains",
        ),
        (
            "resources template",
            "POST",
            "/v1/agl/resources",
            lambda t: {"p": {"resource_type": "prompt_template", "template": t, "engine": "f-string"}},
            "template",
        ),
        (
            "resources name",
            "POST",
            "/v1/agl/resources",
            lambda t: {t: {"resource_type": "prompt_template", "template": "x", "engine": "f-string"}},
            "object key",
        ),
        (
            "resources llm sampling",
            "POST",
            "/v1/agl/resources",
            lambda t: {
                "llm": {"resource_type": "llm", "endpoint": "http://x", "model": "m", "sampling_parameters": {"s": t}}
            },
            "sampling_parameters",
        ),
        (
            "update resources endpoint",
            "POST",
            "/v1/agl/resources/res-hostile",
            lambda t: {"llm": {"resource_type": "llm", "endpoint": t, "model": "m"}},
            "endpoint",
        ),
        ("span name", "POST", "/v1/agl/spans", span(name=lambda t: t), "name"),
        ("span attribute value", "POST", "/v1/agl/spans", span(attributes=lambda t: {"a": t}), "attributes"),
        ("span attribute key", "POST", "/v1/agl/spans", span(attributes=lambda t: {t: "v"}), "attributes"),
        ("span attribute list", "POST", "/v1/agl/spans", span(attributes=lambda t: {"l": ["ok", t]}), "attributes"),
        (
            "span event name",
            "POST",
            "/v1/agl/spans",
            span(events=lambda t: [{"name": t, "attributes": {}, "timestamp": 1.0}]),
            "events",
        ),
        (
            "span resource attribute",
            "POST",
            "/v1/agl/spans",
            span(resource=lambda t: {"attributes": {"service.name": t}, "schema_url": ""}),
            "resource",
        ),
        (
            "span status description",
            "POST",
            "/v1/agl/spans",
            span(status=lambda t: {"status_code": "ERROR", "description": t}),
            "description",
        ),
        ("span trace_id", "POST", "/v1/agl/spans", span(trace_id=lambda t: t), "trace_id"),
        ("span parent_id", "POST", "/v1/agl/spans", span(parent_id=lambda t: t), "parent_id"),
        ("span extra field", "POST", "/v1/agl/spans", span(custom_extra=lambda t: {"x": t}), "custom_extra"),
        ("span rollout_id", "POST", "/v1/agl/spans", span(rollout_id=lambda t: t), "rollout_id"),
        (
            "search spans name_contains",
            "POST",
            "/v1/agl/spans/search",
            lambda t: {"rollout_id": rid, "name_contains": t},
            "name_contains",
        ),
        (
            "search spans trace_id_contains",
            "POST",
            "/v1/agl/spans/search",
            lambda t: {"rollout_id": rid, "trace_id_contains": t},
            "trace_id_contains",
        ),
        (
            "search spans span_id_contains",
            "POST",
            "/v1/agl/spans/search",
            lambda t: {"rollout_id": rid, "span_id_contains": t},
            "span_id_contains",
        ),
        (
            "search spans parent_id_contains",
            "POST",
            "/v1/agl/spans/search",
            lambda t: {"rollout_id": rid, "parent_id_contains": t},
            "parent_id_contains",
        ),
        ("search spans name", "POST", "/v1/agl/spans/search", lambda t: {"rollout_id": rid, "name": t}, "name"),
        ("search spans rollout_id", "POST", "/v1/agl/spans/search", lambda t: {"rollout_id": t}, "rollout_id"),
        (
            "search spans attempt_id",
            "POST",
            "/v1/agl/spans/search",
            lambda t: {"rollout_id": rid, "attempt_id": t},
            "attempt_id",
        ),
        (
            "next sequence id rollout",
            "POST",
            "/v1/agl/spans/next",
            lambda t: {"rollout_id": t, "attempt_id": aid},
            "rollout_id",
        ),
        (
            "next sequence id attempt",
            "POST",
            "/v1/agl/spans/next",
            lambda t: {"rollout_id": rid, "attempt_id": t},
            "attempt_id",
        ),
        (
            "wait rollout_ids",
            "POST",
            "/v1/agl/waits/rollouts",
            lambda t: {"rollout_ids": [t], "timeout": 0},
            "rollout_ids",
        ),
    ]


def _param_locations(ids: Dict[str, str]) -> List[Tuple[str, str, str, str, str]]:
    """``(label, method, path with {t} for the hostile text, query with {t}, parameter the error must name)``."""
    rid = ids["rollout_id"]
    return [
        (
            "GET rollouts rollout_id_contains",
            "GET",
            "/v1/agl/rollouts",
            "rollout_id_contains={t}",
            "rollout_id_contains",
        ),
        ("GET rollouts rollout_id_in", "GET", "/v1/agl/rollouts", "rollout_id_in={t}", "rollout_id_in"),
        ("GET workers worker_id_contains", "GET", "/v1/agl/workers", "worker_id_contains={t}", "worker_id_contains"),
        ("GET spans rollout_id", "GET", "/v1/agl/spans", "rollout_id={t}", "rollout_id"),
        ("GET spans name_contains", "GET", "/v1/agl/spans", f"rollout_id={rid}&name_contains={{t}}", "name_contains"),
        ("GET spans trace_id", "GET", "/v1/agl/spans", f"rollout_id={rid}&trace_id={{t}}", "trace_id"),
        (
            "GET resources resources_id_contains",
            "GET",
            "/v1/agl/resources",
            "resources_id_contains={t}",
            "resources_id_contains",
        ),
        ("GET resources resources_id", "GET", "/v1/agl/resources", "resources_id={t}", "resources_id"),
        ("GET rollout by id", "GET", "/v1/agl/rollouts/a{t}b", "", "rollout_id"),
        ("POST update rollout id", "POST", "/v1/agl/rollouts/a{t}b", "", "rollout_id"),
        ("GET attempts of rollout", "GET", "/v1/agl/rollouts/a{t}b/attempts", "", "rollout_id"),
        ("GET latest attempt", "GET", "/v1/agl/rollouts/a{t}b/attempts/latest", "", "rollout_id"),
        ("POST start attempt id", "POST", "/v1/agl/rollouts/a{t}b/attempts", "", "rollout_id"),
        ("POST update attempt rollout id", "POST", "/v1/agl/rollouts/a{t}b/attempts/latest", "", "rollout_id"),
        ("POST update attempt attempt id", "POST", f"/v1/agl/rollouts/{rid}/attempts/a{{t}}b", "", "attempt_id"),
        ("POST search attempts id", "POST", "/v1/agl/rollouts/a{t}b/attempts/search", "", "rollout_id"),
        ("GET worker by id", "GET", "/v1/agl/workers/a{t}b", "", "worker_id"),
        ("POST heartbeat id", "POST", "/v1/agl/workers/a{t}b", "", "worker_id"),
        ("GET resources by id", "GET", "/v1/agl/resources/a{t}b", "", "resources_id"),
        ("POST update resources id", "POST", "/v1/agl/resources/a{t}b", "", "resources_id"),
    ]


_PARAM_BODIES = {
    "POST update rollout id": b"{}",
    "POST start attempt id": b"{}",
    "POST update attempt rollout id": b'{"status": "running"}',
    "POST update attempt attempt id": b'{"status": "running"}',
    "POST search attempts id": b"{}",
    "POST heartbeat id": b"{}",
    "POST update resources id": j({"p": {"resource_type": "prompt_template", "template": "x", "engine": "f-string"}}),
}


def text_cases(ids: Dict[str, str]) -> List[Case]:
    """NUL and lone-surrogate variants of every location (400 naming the field), and NUL in every parameter."""
    cases: List[Case] = []
    for label, method, path, build, names in _text_locations(ids):
        for kind, text in (("NUL", f"a{NUL}b"), ("surrogate", f"a{SURROGATE}b")):
            cases.append(Case(f"{kind} in {label}", method, path, j(build(text)), 400, names))
    for label, method, path, query, names in _param_locations(ids):
        body = _PARAM_BODIES.get(label)
        cases.append(
            Case(
                f"NUL in {label}",
                method,
                path.replace("{t}", "%00"),
                body,
                400,
                names,
                query=query.replace("{t}", quote("a\x00b")),
            )
        )
    return cases
