"""Table rows: integers, non-finite numbers, nesting depth, malformed bodies, injection-looking filters, routes, raw HTTP."""

from __future__ import annotations

import gzip
from typing import Dict, List, Optional, Tuple, Union

from rollouthub.store.domains import INT64_MAX, MAX_JSON_DEPTH, MAX_OFFSET, MAX_PAGE_SIZE, MAX_SEQUENCE_ID

from .case import Case, j, nested, nested_json, total_is
from .live import legit_span


def number_cases(ids: Dict[str, str]) -> List[Case]:
    """Integers outside the domains, huge ``limit``/``offset``, non-finite numbers (400 naming the field)."""
    rid, aid = ids["rollout_id"], ids["attempt_id"]
    cases: List[Case] = []
    for seq, names in (
        (MAX_SEQUENCE_ID + 1, "sequence_id"),
        (INT64_MAX, "sequence_id"),
        (2**63, "sequence_id"),
        (2**70, "sequence_id"),
        (-(2**63) - 1, "sequence_id"),
    ):
        body = legit_span(rid, aid, sequence_id=seq, span_id="00000000000000d1")
        cases.append(Case(f"span sequence_id {seq}", "POST", "/v1/agl/spans", j(body), 400, names))
    searches = [
        ("/v1/agl/rollouts/search", {}),
        ("/v1/agl/workers/search", {}),
        ("/v1/agl/spans/search", {"rollout_id": rid}),
        (f"/v1/agl/rollouts/{rid}/attempts/search", {}),
    ]
    for path, base in searches:
        for key, value in (
            ("limit", 2**31),
            ("limit", MAX_PAGE_SIZE + 1),
            ("limit", 2**63),
            ("offset", MAX_OFFSET + 1),
            ("offset", 2**70),
        ):
            cases.append(Case(f"{path} {key}={value}", "POST", path, j({**base, key: value}), 400, key))
    for path, query in (
        ("/v1/agl/rollouts", ""),
        ("/v1/agl/workers", ""),
        ("/v1/agl/spans", f"rollout_id={rid}&"),
        ("/v1/agl/resources", ""),
        (f"/v1/agl/rollouts/{rid}/attempts", ""),
    ):
        for key, value in (("limit", 2**31), ("offset", 2**31), ("limit", 2**64)):
            cases.append(Case(f"GET {path} {key}={value}", "GET", path, None, 400, key, query=f"{query}{key}={value}"))
    for value in (2**31, MAX_PAGE_SIZE + 1, 2**63, 2**70):
        cases.append(
            Case(f"dequeue limit {value}", "POST", "/v1/agl/queues/rollouts/dequeue", j({"limit": value}), 400, "limit")
        )
    big = {
        "input 2^100": ("/v1/agl/rollouts", {"input": 2**100}, "input"),
        "metadata 2^64": ("/v1/agl/rollouts", {"input": 1, "metadata": {"n": 2**64}}, "metadata"),
        "max_attempts 2^70": ("/v1/agl/rollouts", {"input": 1, "config": {"max_attempts": 2**70}}, "max_attempts"),
        "heartbeat 2^64": ("/v1/agl/workers/seed-worker", {"heartbeat_stats": {"n": -(2**64)}}, "heartbeat_stats"),
        "span attribute 2^64": (
            "/v1/agl/spans",
            {**legit_span(rid, aid, sequence_id=8, span_id="00000000000000d2"), "attributes": {"n": 2**64}},
            "attributes",
        ),
    }
    for label, (path, body, names) in big.items():
        cases.append(Case(f"integer {label}", "POST", path, j(body), 400, names))
    non_finite = {
        "input NaN": ("/v1/agl/rollouts", b'{"input": NaN}', "input"),
        "metadata Infinity": ("/v1/agl/rollouts", b'{"input": 1, "metadata": {"x": Infinity}}', "metadata"),
        "input 1e400": ("/v1/agl/rollouts", b'{"input": [1e400]}', "input"),
        "config timeout NaN": (
            "/v1/agl/rollouts",
            b'{"input": 1, "config": {"timeout_seconds": NaN}}',
            "timeout_seconds",
        ),
        "heartbeat time Infinity": (
            f"/v1/agl/rollouts/{rid}/attempts/{aid}",
            b'{"last_heartbeat_time": Infinity}',
            "last_heartbeat_time",
        ),
        "span start_time NaN": (
            "/v1/agl/spans",
            j(legit_span(rid, aid, sequence_id=9, span_id="00000000000000d3"))[:-1] + b', "start_time": NaN}',
            "start_time",
        ),
        "wait timeout -Infinity": (
            "/v1/agl/waits/rollouts",
            b'{"rollout_ids": ["x"], "timeout": -Infinity}',
            "timeout",
        ),
    }
    for label, (path, body, names) in non_finite.items():
        cases.append(Case(f"non-finite {label}", "POST", path, body, 400, names))
    return cases


def depth_cases(ids: Dict[str, str]) -> List[Case]:
    """Nesting beyond ``MAX_JSON_DEPTH`` in every free-form field, and one at the limit (accepted)."""
    rid, aid = ids["rollout_id"], ids["attempt_id"]
    over = MAX_JSON_DEPTH + 1
    span = legit_span(rid, aid, sequence_id=10, span_id="00000000000000e1")
    cases = [
        Case("depth limit input", "POST", "/v1/agl/rollouts", j({"input": nested(over)}), 400, "depth"),
        Case("depth 300 input", "POST", "/v1/agl/rollouts", j({"input": nested(300)}), 400, "depth"),
        Case("depth 5000 input", "POST", "/v1/agl/rollouts", b'{"input": ' + nested_json(5000) + b"}", 400),
        Case("depth 100000 input", "POST", "/v1/agl/rollouts", b'{"input": ' + nested_json(100_000) + b"}", 400),
        Case(
            "depth enqueue metadata",
            "POST",
            "/v1/agl/queues/rollouts/enqueue",
            j({"rollouts": [{"input": 1, "metadata": {"m": nested(100)}}]}),
            400,
            "depth",
        ),
        Case(
            "depth heartbeat",
            "POST",
            "/v1/agl/workers/w-deep",
            j({"heartbeat_stats": {"s": nested(100)}}),
            400,
            "depth",
        ),
        Case(
            "depth update rollout", "POST", f"/v1/agl/rollouts/{rid}", j({"metadata": {"m": nested(200)}}), 400, "depth"
        ),
        Case("depth span extra", "POST", "/v1/agl/spans", j({**span, "extra_deep": nested(100)}), 400, "depth"),
        Case(
            "depth resources",
            "POST",
            "/v1/agl/resources",
            j(
                {
                    "llm": {
                        "resource_type": "llm",
                        "endpoint": "e",
                        "model": "m",
                        "sampling_parameters": {"d": nested(100)},
                    }
                }
            ),
            400,
            "depth",
        ),
        Case("depth top-level array", "POST", "/v1/agl/rollouts/search", nested_json(3000), (400, 422)),
        Case(
            "depth attempt metadata",
            "POST",
            f"/v1/agl/rollouts/{rid}/attempts/{aid}",
            j({"metadata": nested(70)}),
            (400, 422),
        ),
    ]
    allowed = nested(MAX_JSON_DEPTH - 2)  # body object + "input" array levels: exactly MAX_JSON_DEPTH
    cases.append(Case("depth at the limit is accepted", "POST", "/v1/agl/rollouts", j({"input": allowed}), 201))
    return cases


def malformed_cases(ids: Dict[str, str]) -> List[Case]:
    """Malformed JSON, wrong types, unknown enums, forbidden nulls, odd content types."""
    rid = ids["rollout_id"]
    rows: List[Tuple[str, str, bytes, Union[int, Tuple[int, ...]], Optional[str]]] = [
        ("/v1/agl/rollouts", "not json", b"{not json", 422, None),
        ("/v1/agl/rollouts", "array body", b"[1, 2]", 422, None),
        ("/v1/agl/rollouts", "empty body", b"", 422, None),
        ("/v1/agl/rollouts", "unknown mode", b'{"input": 1, "mode": "bogus"}', 422, "mode"),
        ("/v1/agl/rollouts", "max_attempts 0", b'{"input": 1, "config": {"max_attempts": 0}}', 422, "max_attempts"),
        ("/v1/agl/rollouts", "metadata text", b'{"input": 1, "metadata": "text"}', 422, "metadata"),
        (
            "/v1/agl/rollouts",
            "metadata deep list",
            b'{"input": 1, "metadata": ' + nested_json(950) + b"}",
            (400, 422),
            None,
        ),
        (
            "/v1/agl/rollouts",
            "metadata deep list 500",
            b'{"input": 1, "metadata": ' + nested_json(500) + b"}",
            422,
            "metadata",
        ),
        ("/v1/agl/rollouts", "invalid utf-8", b'{"input": "\xff\xfe"}', 400, None),
        ("/v1/agl/rollouts", "truncated", b'{"input": "abc', 422, None),
        ("/v1/agl/rollouts", "trailing garbage", b'{"input": 1} xyz', 422, None),
        ("/v1/agl/rollouts", "duplicate keys", b'{"input": 1, "input": 2}', 201, None),
        ("/v1/agl/queues/rollouts/dequeue", "limit text", b'{"limit": "many"}', 422, "limit"),
        ("/v1/agl/queues/rollouts/dequeue", "limit float", b'{"limit": 1.5}', 422, "limit"),
        ("/v1/agl/queues/rollouts/dequeue", "negative timeout", b'{"timeout": -1}', 422, "timeout"),
        ("/v1/agl/queues/rollouts/dequeue", "timeout NaN", b'{"timeout": NaN}', 422, "timeout"),
        ("/v1/agl/queues/rollouts/dequeue", "limit NaN", b'{"limit": NaN}', 422, "limit"),
        ("/v1/agl/rollouts/search", "offset Infinity", b'{"offset": Infinity}', 422, "offset"),
        ("/v1/agl/queues/rollouts/enqueue", "missing input", b'{"rollouts": [{"mode": "train"}]}', 422, "input"),
        ("/v1/agl/queues/rollouts/enqueue", "rollouts not list", b'{"rollouts": {"input": 1}}', 422, "rollouts"),
        ("/v1/agl/rollouts/search", "unknown status", b'{"status_in": ["nope"]}', 422, "status_in"),
        ("/v1/agl/rollouts/search", "unknown sort order", b'{"sort_order": "sideways"}', 422, "sort_order"),
        ("/v1/agl/rollouts/search", "unknown filter logic", b'{"filter_logic": "xor"}', 422, "filter_logic"),
        ("/v1/agl/rollouts/search", "limit 0", b'{"limit": 0}', 400, "imit"),
        ("/v1/agl/rollouts/search", "offset -1", b'{"offset": -1}', 400, "ffset"),
        ("/v1/agl/workers/search", "workers limit float", b'{"limit": 1.5}', 422, "limit"),
        ("/v1/agl/workers/search", "unknown worker status", b'{"status_in": ["asleep"]}', 422, "status_in"),
        ("/v1/agl/spans/next", "rollout_id int", b'{"rollout_id": 1, "attempt_id": "a"}', 422, "rollout_id"),
        ("/v1/agl/waits/rollouts", "rollout_ids text", b'{"rollout_ids": "abc"}', 422, "rollout_ids"),
        ("/v1/agl/waits/rollouts", "timeout NaN literal", b'{"rollout_ids": ["x"], "timeout": NaN}', 400, "timeout"),
        ("/v1/agl/resources", "llm without endpoint", b'{"r": {"resource_type": "llm"}}', 422, "endpoint"),
        ("/v1/agl/resources", "unknown resource type", b'{"r": {"resource_type": "bogus"}}', 422, "resource_type"),
        ("/v1/agl/resources", "resources not object", b"[1]", 422, None),
        ("/v1/agl/spans", "span without attempt", b'{"rollout_id": "r"}', 422, "attempt_id"),
        (
            "/v1/agl/spans",
            "span status unknown",
            j({**legit_span(rid, "a"), "status": {"status_code": "MEH"}}),
            422,
            "status_code",
        ),
        (f"/v1/agl/rollouts/{rid}", "update status null", b'{"status": null}', 400, "status"),
        (f"/v1/agl/rollouts/{rid}", "update unknown status", b'{"status": "exploded"}', 422, "status"),
        (f"/v1/agl/rollouts/{rid}/attempts/latest", "attempt status unknown", b'{"status": "done"}', 422, "status"),
        (f"/v1/agl/rollouts/{rid}/attempts/latest", "attempt worker null", b'{"worker_id": null}', 400, "worker_id"),
        ("/v1/agl/workers/seed-worker", "heartbeat null", b'{"heartbeat_stats": null}', 400, "heartbeat_stats"),
        ("/v1/agl/workers/seed-worker", "heartbeat list", b'{"heartbeat_stats": [1]}', 422, "heartbeat_stats"),
    ]
    cases = [Case(f"malformed {label}", "POST", path, body, status, names) for path, label, body, status, names in rows]
    cases += [
        Case("query limit text", "GET", "/v1/agl/rollouts", None, 422, "limit", query="limit=ten"),
        Case("query unknown status", "GET", "/v1/agl/workers", None, 422, "status_in", query="status_in=asleep"),
        Case(
            "query filter logic",
            "GET",
            "/v1/agl/spans",
            None,
            422,
            "filter_logic",
            query="rollout_id=r&filter_logic=xor",
        ),
        Case("query offset float", "GET", "/v1/agl/resources", None, 422, "offset", query="offset=1e3"),
        Case("query spans without rollout", "GET", "/v1/agl/spans", None, 422, "rollout_id"),
        Case(
            "text/plain body",
            "POST",
            "/v1/agl/rollouts",
            b'{"input": 1}',
            (201, 422),
            headers=(("Content-Type", "text/plain"),),
        ),
        Case(
            "gzip-encoded REST body",
            "POST",
            "/v1/agl/rollouts",
            gzip.compress(b'{"input": 1}'),
            (400, 415, 422),
            headers=(("Content-Type", "application/json"), ("Content-Encoding", "gzip")),
        ),
    ]
    return cases


def filter_injection_cases(ids: Dict[str, str]) -> List[Case]:
    """Injection-looking ``*_contains`` filters (literal substrings: nothing matches) and sort keys (400)."""
    rid = ids["rollout_id"]
    hostile = ["' OR '1'='1", "%", "_", "\\", "%' --", '"; DROP TABLE rollouts; --', "*", ".*", "$where", "[a-z]"]
    cases: List[Case] = []
    for text in hostile:
        cases.append(
            Case(
                f"rollout_id_contains {text!r}",
                "POST",
                "/v1/agl/rollouts/search",
                j({"rollout_id_contains": text}),
                200,
                check=total_is(0),
            )
        )
        cases.append(
            Case(
                f"span name_contains {text!r}",
                "POST",
                "/v1/agl/spans/search",
                j({"rollout_id": rid, "name_contains": text}),
                200,
                check=total_is(0),
            )
        )
    cases += [
        Case(
            "worker_id_contains %",
            "GET",
            "/v1/agl/workers",
            None,
            200,
            query="worker_id_contains=%25",
            check=total_is(0),
        ),
        Case(
            "resources_id_contains _",
            "GET",
            "/v1/agl/resources",
            None,
            200,
            query="resources_id_contains=_",
            check=total_is(0),
        ),
        Case(
            "rollout_id_in wildcard",
            "POST",
            "/v1/agl/rollouts/search",
            j({"rollout_id_in": ["%"]}),
            200,
            check=total_is(0),
        ),
        Case("spans of rollout %", "POST", "/v1/agl/spans/search", j({"rollout_id": "%"}), 200, check=total_is(0)),
    ]
    for sort_by in (
        "start_time; DROP TABLE rollouts",
        "rollout_id desc",
        "__class__",
        "input->>'x'",
        "1",
        "status) --",
    ):
        cases.append(
            Case(f"sort_by {sort_by!r}", "POST", "/v1/agl/rollouts/search", j({"sort_by": sort_by}), 400, "sort_by")
        )
    cases.append(
        Case(
            "spans sort_by injection",
            "GET",
            "/v1/agl/spans",
            None,
            400,
            "sort_by",
            query=f"rollout_id={rid}&sort_by=name%3B%20--",
        )
    )
    return cases


def route_cases() -> List[Case]:
    """Unknown routes and methods."""
    rows: List[Tuple[str, str, Union[int, Tuple[int, ...]]]] = [
        ("DELETE", "/v1/agl/rollouts", 405),
        ("PUT", "/v1/agl/rollouts/x", 405),
        ("PATCH", "/v1/agl/workers/x", 405),
        ("GET", "/v1/agl/nope", 404),
        ("POST", "/v1/agl/health", 405),
        ("GET", "/v1/traces", (404, 405)),
        ("GET", "/v1/agl/queues/rollouts/dequeue", (404, 405)),
        ("GET", "/v1/agl/rollouts/x/attempts/y/z", 404),
        ("POST", "/v1/agl", (404, 405)),
        ("GET", "/v1/agl/", 404),
        ("OPTIONS", "/v1/agl/rollouts", 405),
        ("GET", "/v1/nothing", 404),
    ]
    return [Case(f"route {method} {path}", method, path, None, status, headers=()) for method, path, status in rows]


def raw_cases() -> List[Case]:
    """Requests a client library would normalise: path traversal on the dashboard route, malformed HTTP."""
    secret = ("root:", "import ", "def ")
    paths = [
        "/../../etc/passwd",
        "/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "/assets/../../../../etc/passwd",
        "/assets/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "/..%2f..%2f..%2fetc%2fpasswd",
        "/assets/..%5c..%5c..%5cetc%5cpasswd",
        "/%2e%2e/store/server_app.py",
        "/assets/../../store/server_app.py",
        "//etc/passwd",
    ]
    cases = [
        Case(f"traversal {path}", "GET", path, None, (200, 404), headers=(), must_not_contain=secret, raw=True)
        for path in paths
    ]
    cases += [
        Case(
            "invalid content-length",
            "POST",
            "/v1/agl/rollouts",
            b'{"input": 1}',
            400,
            headers=(("Content-Type", "application/json"), ("Content-Length", "abc")),
            raw=True,
        ),
        Case(
            "content-length beyond the limit",
            "POST",
            "/v1/agl/rollouts",
            b"{}",
            413,
            "limit",
            headers=(("Content-Type", "application/json"), ("Content-Length", str(10**12))),
            raw=True,
        ),
        Case("NUL in the request line", "GET", "/v1/agl/rollouts/a\x00b", None, 400, headers=(), raw=True),
        Case("bad request line", "GET", "/v1/agl/health HTTP/1.1 extra", None, 400, headers=(), raw=True),
    ]
    return cases
