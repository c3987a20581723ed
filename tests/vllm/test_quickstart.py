"""README.md's "With vLLM" quick start, run exactly as written (issue 47):
the shell blocks between its `readme-snippet: vllm` markers, in bash from
the checkout's root, with none of the test environment's PYTHONPATH or
LAYERCAKE_LIB (the README sets what it needs). They build, open the pinned
venv, make the tiny model, start P, D and the proxy in the background on
the README's fixed loopback ports, wait for them, send one completion and
ask the proxy and D's /metrics what happened. The answer must be HTTP 200
with max_tokens tokens and every prompt token cached (its KV came from P),
the proxy must count one request and no errors, D's /metrics must count a
room that ended well and its bytes, and the output the README shows below
the commands must be what they print. The processes the commands start are
all in one process group, ended by the test whatever happens."""
import json
import os
import re
import signal
import socket
import subprocess
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.path.join(ROOT, "README.md")
LOGS = "/tmp/lc-quick"  # where the README's commands write P's, D's and the proxy's logs
DEADLINE_S = 900  # the whole quick start, on a loaded machine (about 2.5 min on a quiet one)


def readme_quickstart():
    """(the shell blocks between the markers, joined; the text block after them)."""
    text = open(README).read()
    begin, end = "<!-- readme-snippet: vllm begin -->", "<!-- readme-snippet: vllm end -->"
    assert begin in text and end in text, "README.md: no vllm quick start between its markers"
    inside, after = text.split(begin, 1)[1].split(end, 1)
    blocks = re.findall(r"^```sh\n(.*?)^```", inside, re.S | re.M)
    assert blocks, "README.md: no ```sh block between the vllm markers"
    shown = re.search(r"^```text\n(.*?)^```", after, re.S | re.M)
    assert shown, "README.md: no ```text block of the output after the vllm quick start"
    return "\n".join(blocks), shown.group(1).strip().splitlines()


def port_free(port):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def group_pids(pgid):
    """The live processes of process group pgid (from /proc)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state ppid pgrp
        if fields[0] != "Z" and int(fields[2]) == pgid:
            pids.append(int(d))
    return pids


def servers_in(pgid):
    """The ports of the vLLM servers alive in the group."""
    ports = set()
    for pid in group_pids(pgid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "vllm.entrypoints.openai.api_server" in argv and "--port" in argv:
            ports.add(argv[argv.index("--port") + 1])
    return ports


def end_group(pgid):
    """SIGTERM the group, SIGKILL what is left after 60 s."""
    for sig, wait_s in ((signal.SIGTERM, 60), (signal.SIGKILL, 30)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        t0 = time.monotonic()
        while group_pids(pgid) and time.monotonic() - t0 < wait_s:
            time.sleep(0.5)
        if not group_pids(pgid):
            return


def tails():
    out = []
    for name in ("P.log", "D.log", "proxy.log"):
        try:
            out.append(f"--- {LOGS}/{name}\n" + open(os.path.join(LOGS, name)).read()[-3000:])
        except OSError:
            pass
    return "\n".join(out)


def test_readme_quickstart(tmp_path):
    script, shown = readme_quickstart()
    ports = sorted({int(p) for p in re.findall(r"--port (\d+)", script)} |
                   {int(p) for p in re.findall(r'"bootstrap_port":(\d+)', script)})
    assert len(ports) == 4, ports  # P, D, the proxy, P's bootstrap
    t0 = time.monotonic()
    while not all(port_free(p) for p in ports):  # a previous run's servers still exiting
        taken = [p for p in ports if not port_free(p)]
        assert time.monotonic() - t0 < 60, f"the README's ports {taken} are taken: free them"
        time.sleep(1)
    body = json.loads(re.search(r"-d '(\{.*?\})'", script).group(1))

    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "LAYERCAKE_LIB", "VIRTUAL_ENV", "PYTHONHOME")}
    out_path = tmp_path / "quickstart.out"
    with open(out_path, "w") as out:
        sh = subprocess.Popen(["bash", "-e", "-c", script], cwd=ROOT, env=env, stdout=out,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              start_new_session=True)
    t0 = time.monotonic()
    seen = set()
    try:
        while sh.poll() is None:
            # A server that started and is gone again leaves the README's
            # wait loop spinning: fail at once with its log.
            alive = servers_in(sh.pid)
            assert not (seen - alive), f"server(s) on {seen - alive} exited\n" + tails()
            seen |= alive
            assert time.monotonic() - t0 < DEADLINE_S, \
                f"the quick start did not finish in {DEADLINE_S} s\n" + out_path.read_text() + tails()
            time.sleep(1)
        took = time.monotonic() - t0
        text = out_path.read_text()
        assert sh.returncode == 0, f"rc {sh.returncode}\n{text}\n{tails()}"
    finally:
        end_group(sh.pid)
    print(f"README quick start: {took:.0f} s from the build to D's metrics")

    lines = text.splitlines()
    i = next((k for k, line in enumerate(lines) if line.startswith('{"id":"cmpl-')), None)
    assert i is not None, text
    assert lines[i + 1] == "HTTP 200", lines[i:i + 2]
    answer = json.loads(lines[i])
    shown_answer = lines[i]
    choice = answer["choices"][0]
    assert choice["prompt_token_ids"] == body["prompt"], shown_answer
    assert len(choice["token_ids"]) == body["max_tokens"], shown_answer
    # Every prompt token's KV came from P through the connector: D computed none.
    cached = (answer["usage"].get("prompt_tokens_details") or {}).get("cached_tokens")
    assert cached == len(body["prompt"]), shown_answer

    stats = json.loads(next(line for line in lines if line.startswith('{"requests"')))
    assert stats == {"requests": 1, "p_errors": 0, "d_errors": 0, "client_gone": 0}, stats

    def metric(name, **labels):
        for line in lines:
            m = re.match(r"(\S+?)\{(.*)\} (\S+)$", line)
            if m and m.group(1) == name and all(f'{k}="{v}"' in m.group(2)
                                                for k, v in labels.items()):
                return float(m.group(3))
        return None

    assert metric("vllm:layercake_events_total", event="rooms_ok") == 1.0, text
    assert (metric("vllm:layercake_bytes_transferred_sum") or 0) > 0, text
    # What the README says they print is what they print.
    for line in shown:
        assert line in lines, f"README.md shows {line!r}; the commands printed\n{text}"
    assert '"cached_tokens":%d' % cached in open(README).read().split(
        "<!-- readme-snippet: vllm end -->", 1)[1][:2000], "README.md: its cached_tokens claim"
