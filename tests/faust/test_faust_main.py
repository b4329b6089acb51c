"""``app.main()``: ``python app.py worker -l info`` runs the worker, as Faust's does."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

APP = '''
import streamkit as faust

app = faust.App("mainapp", broker="file://{log}")
greetings = app.topic("greetings", value_type=str)


@app.agent(greetings)
async def greet(stream):
    async for greeting in stream:
        print("got", greeting, flush=True)


if __name__ == "__main__":
    app.main()
'''


def test_python_app_py_worker_runs_the_app(tmp_path: Path) -> None:
    script = tmp_path / "myapp.py"
    script.write_text(APP.format(log=tmp_path / "log"))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(script), *args], cwd=tmp_path, capture_output=True, text=True, timeout=60)

    listed = run("agents")
    assert listed.returncode == 0 and "greet" in listed.stdout, listed.stderr
    sent = run("send", "greetings", "hello")
    assert sent.returncode == 0, sent.stderr
    worker = subprocess.Popen([sys.executable, str(script), "worker", "-l", "info", "--progress-interval", "0"],
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert worker.stdout is not None
        deadline = time.monotonic() + 60
        line = ""
        while time.monotonic() < deadline and "got hello" not in line:
            line = worker.stdout.readline()
        assert "got hello" in line
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0
    stderr = worker.stderr.read() if worker.stderr is not None else ""
    assert re.search(r"streamkit worker: app 'mainapp'", stderr) and "Traceback" not in stderr
    wrong = run("bogus")
    assert wrong.returncode == 2 and wrong.stderr.startswith("streamkit: error: No such command 'bogus'")
