"""The live page in a real browser: headless Chromium, signed in by ``sessionwarden ui``.

A real daemon (a subprocess) in front of the fake provider, an agent loop through the
``openai`` SDK running real shell commands on real files, and Debian's Chromium driven by
Playwright (the system browser, nothing downloaded; ``.ci/run`` installs it). The test
signs in through the one-time link, watches a session appear and its context bar move
as the agent works (a spill, then a compaction), opens its timeline and a call's replay,
and checks that nothing the page loads comes from anywhere but the daemon. Screenshots
at 1280×800 and at a phone's width go to ``$SESSIONWARDEN_UI_SCREENSHOTS`` when set (the
ones in ``docs/ui/`` were made so), else to the test's directory.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.cmd.daemon_fixtures import Daemon, DaemonMaker
from tests.support.fake_provider import FakeProviderServer

pytestmark = pytest.mark.slow

#: The agent's model: a small window, so a working session reaches its compaction.
CONFIG = """
[budgets]
session_usd = "2.00"
[tools]
result_size_chars = 20000
[[models]]
name = "small-agent"
provider = "fake"
context_length = 10000
max_output_tokens = 1000
price = { input = "3.00", output = "15.00" }
"""
SHELL = {"type": "function", "function": {
    "name": "shell", "description": "Run a shell command in the project.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                   "required": ["command"]}}}


def chromium() -> str:
    found = os.environ.get("SESSIONWARDEN_CHROMIUM") or shutil.which("chromium") or shutil.which(
        "chromium-browser")
    assert found, "Chromium is not installed (.ci/run installs Debian's chromium package)"
    return found


def project(root: Path) -> list[str]:
    """Real files for the agent to read, and the commands it will run, in order."""
    src = root / "project"
    src.mkdir()
    commands = []
    for n in range(9):
        body = "".join(f"def handler_{n}_{i}(request):\n    return {{'status': {i}}}\n\n"
                       for i in range(110))
        (src / f"module_{n}.py").write_text(body)
        commands.append({"command": f"cat module_{n}.py"})
        if n == 1:  # one huge output: spilled to a file, a preview kept
            (src / "build.log").write_text("".join(f"[{i:05d}] compiling unit {i}\n"
                                                   for i in range(2500)))
            commands.append({"command": "cat build.log"})
    return commands


def run_agent_step(daemon: Daemon, messages: list[dict[str, Any]], cwd: Path) -> bool:
    """One model call and the real tool runs it asks for; False once it answers in text."""
    sdk = daemon.openai(session="refactor-auth")
    answer = sdk.chat.completions.create(model="small-agent", messages=messages, tools=[SHELL])
    message = answer.choices[0].message
    messages.append(message.model_dump(exclude_none=True))
    for call in message.tool_calls or []:
        command = json.loads(call.function.arguments)["command"]
        done = subprocess.run(command, shell=True, cwd=cwd, capture_output=True, text=True,
                              timeout=30, check=False)
        messages.append({"role": "tool", "tool_call_id": call.id,
                         "content": done.stdout + done.stderr})
    return bool(message.tool_calls)


def test_sign_in_watch_a_session_work_and_open_its_timeline(
    daemon_factory: DaemonMaker, fake: FakeProviderServer, tmp_path: Path,
) -> None:
    from playwright.sync_api import sync_playwright

    shots = Path(os.environ.get("SESSIONWARDEN_UI_SCREENSHOTS") or tmp_path)
    commands = project(tmp_path)
    fake.state.by_model["small-agent"] = {"tool_arguments": commands}
    daemon = daemon_factory(extra_config=CONFIG).start()
    signed = daemon.cli("ui", "--no-browser")
    link = signed.stdout.strip()
    assert link.startswith(f"http://127.0.0.1:{daemon.port}/ui/signin?code=")
    assert daemon.token not in signed.stdout + signed.stderr
    origin = f"http://127.0.0.1:{daemon.port}/"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 800})
            page = context.new_page()
            requested: list[str] = []
            problems: list[str] = []
            page.on("request", lambda r: requested.append(r.url))
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.goto(link)
            assert page.url == origin + "ui"
            page.wait_for_selector("#link.on")  # the event stream is live
            assert page.evaluate("document.cookie") == ""  # HttpOnly: no script reads it
            # The link is spent: a second visit (a browser's history) is refused.
            assert context.request.get(link, max_redirects=0).status == 403

            messages: list[dict[str, Any]] = [
                {"role": "system", "content": "You are a coding agent working in ./project."},
                {"role": "user", "content": "Read every module and refactor the handlers."}]
            cwd = tmp_path / "project"
            run_agent_step(daemon, messages, cwd)
            row = page.wait_for_selector("[data-session='refactor-auth']")
            assert row is not None
            bar = "[data-session='refactor-auth'] .ctx .bar"
            seen = [int(page.get_attribute(bar, "data-tokens") or 0)]
            widths = [page.eval_on_selector(bar + " .fill", "e => e.style.width")]
            steps = 1
            while run_agent_step(daemon, messages, cwd):
                steps += 1
                page.wait_for_function(
                    "([sel, n]) => { const b = document.querySelector(sel);"
                    " return b && Number(b.dataset.tokens) !== n; }", arg=[bar, seen[-1]])
                seen.append(int(page.get_attribute(bar, "data-tokens") or 0))
                widths.append(page.eval_on_selector(bar + " .fill", "e => e.style.width"))
                if steps == 6:
                    page.screenshot(path=str(shots / "sessions.png"))
            # The bar moved with every call: up as the agent read, down at the compaction.
            assert len(seen) == steps and len(set(widths)) > 2
            assert max(seen) > seen[0] and seen.index(max(seen)) < len(seen) - 1
            page.wait_for_function(
                "() => /[1-9]/.test(document.querySelector(\"[data-session='refactor-auth']"
                " .compactions\").textContent)")

            page.click("[data-session='refactor-auth']")
            page.wait_for_selector("#timeline li[data-kind='compaction']")
            kinds = page.eval_on_selector_all("#timeline li", "ls => ls.map(l => l.dataset.kind)")
            assert {"call", "done", "spill", "compaction"} <= set(kinds)
            page.screenshot(path=str(shots / "timeline.png"))
            page.click("#timeline li[data-kind='call'] a")
            page.wait_for_function(
                "() => document.querySelector('#replay-body').textContent.includes('\"messages\"')")
            assert "sessionwarden replay --session refactor-auth --call" in page.inner_text(
                "#replay-cmd")
            page.screenshot(path=str(shots / "replay.png"))

            page.set_viewport_size({"width": 390, "height": 844})
            page.goto(origin + "ui")
            page.wait_for_selector("[data-session='refactor-auth']")
            # Readable on a phone: nothing wider than the screen.
            assert page.evaluate("document.documentElement.scrollWidth") <= 390
            page.screenshot(path=str(shots / "phone.png"), full_page=True)
        finally:
            browser.close()
    assert problems == []  # no CSP violation, no script error
    assert requested and all(url.startswith(origin) for url in requested), requested
