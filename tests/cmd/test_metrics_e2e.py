"""``GET /metrics`` after real calls, parsed with prometheus-client's own parser."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from tests.cmd.daemon_fixtures import MODEL
from tests.cmd.inprocess import InProcessDaemon, start_made
from tests.support.fake_provider import FakeProviderServer

CONFIG = """
[budgets]
max_iterations = 1
[metrics]
token = "scrape-only-token"
"""


def scrape(daemon: InProcessDaemon, token: str | None) -> httpx.Response:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.get(f"http://127.0.0.1:{daemon.port}/metrics", headers=headers)


def samples(text: str) -> dict[str, list[Sample]]:
    found: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append(sample)
    return found


def value(found: dict[str, list[Sample]], name: str, **labels: str) -> float:
    return sum(s.value for s in found.get(name, [])
               if all(s.labels.get(k) == v for k, v in labels.items()))


def test_a_scrape_after_real_calls_counts_them_with_bounded_labels(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = start_made(made, tmp_path, fake, CONFIG)
    before = samples(scrape(daemon, daemon.token).text)
    assert value(before, "sessionwarden_calls_total") == 0
    fake.state.by_model[MODEL] = {"tool_arguments": [{"command": "true"}] * 3}
    client = daemon.openai(session="metered-session-7")
    tool = {"type": "function", "function": {"name": "shell", "parameters": {}}}
    messages = [{"role": "user", "content": "go"}]
    first = client.chat.completions.create(model=MODEL, messages=messages, tools=[tool])
    calls = first.choices[0].message.tool_calls or []
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": calls[0].id, "content": "done"}]
    client.chat.completions.create(model=MODEL, messages=messages, tools=[tool])  # grace
    messages.append({"role": "assistant", "content": "ok"})
    client.chat.completions.create(model=MODEL, messages=messages, tools=[tool])  # answered
    response = scrape(daemon, daemon.token)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    found = samples(response.text)
    assert value(found, "sessionwarden_calls_total", provider="fake", model=MODEL,
                 outcome="ok", status="200") == 2
    assert value(found, "sessionwarden_calls_total", outcome="answered") == 1
    assert value(found, "gen_ai_client_token_usage_count", gen_ai_system="fake",
                 gen_ai_token_type="input") == 2
    assert value(found, "gen_ai_client_operation_duration_seconds_count") == 3
    assert value(found, "sessionwarden_grace_calls_total") == 1
    assert value(found, "sessionwarden_runaway_answers_total",
                 refused="iteration_budget") == 1
    assert value(found, "sessionwarden_log_events_total", kind="session") > 0
    assert value(found, "sessionwarden_log_wal_bytes") > 0
    assert value(found, "sessionwarden_log_commits_total") > 0
    assert value(found, "sessionwarden_log_commit_seconds_total") > 0
    # Timed by the proxy: the two calls that were sent, not the one answered here.
    assert value(found, "sessionwarden_time_to_first_byte_seconds_count", provider="fake") == 2
    assert value(found, "sessionwarden_proxy_added_seconds_count", provider="fake") == 2
    # No label ever names a session or a call: the label sets stay bounded.
    assert "metered-session-7" not in response.text
    # Every metric has its one-line help.
    for family in text_string_to_metric_families(response.text):
        assert family.documentation, family.name


def test_who_may_scrape(made: list[InProcessDaemon], tmp_path: Path,
                        fake: FakeProviderServer) -> None:
    daemon = start_made(made, tmp_path, fake, CONFIG)
    assert scrape(daemon, None).status_code == 401
    assert scrape(daemon, "wrong").status_code == 401
    assert scrape(daemon, "scrape-only-token").status_code == 200
    # The scrape token opens /metrics only: not the proxy, not the control API.
    other = httpx.get(f"http://127.0.0.1:{daemon.port}/v1/models",
                      headers={"authorization": "Bearer scrape-only-token"})
    assert other.status_code == 401
    head = httpx.head(f"http://127.0.0.1:{daemon.port}/metrics",
                      headers={"authorization": f"Bearer {daemon.token}"})
    assert head.status_code == 200 and not head.content
    wrong_host = httpx.get(f"http://127.0.0.1:{daemon.port}/metrics",
                           headers={"authorization": f"Bearer {daemon.token}",
                                    "host": "evil.example"})
    assert wrong_host.status_code == 403


@pytest.mark.parametrize("public", [True, False])
def test_public_metrics_need_no_token_on_loopback(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer, public: bool
) -> None:
    daemon = start_made(made, tmp_path, fake,
                        f"[metrics]\npublic = {'true' if public else 'false'}\n")
    assert scrape(daemon, None).status_code == (200 if public else 401)
