import json, sys, shutil
from pathlib import Path
from contextfold import ContextManager
from contextfold.config import resolve_preset
from tests.conftest import load_trace, trace_files

out = Path(sys.argv[1])
shutil.rmtree(out, ignore_errors=True)
files = sorted(trace_files(), key=lambda p: p.stat().st_size)
data = load_trace(files[len(files)//2])
cm = ContextManager(workspace=out, session_id="legacy-a", context_window=16000, preset="harness", agent_id="alice")
n = 0
for i, msg in enumerate(data):
    if msg["role"] == "assistant" and i > 0:
        cm.prepare()
    cm.add(msg)
    n += 1
    if n >= 60:
        break
cm.prepare()
cm.compact()
cm.state.set_todos([{"content": "fix the parser", "status": "in_progress"}])
cm.save_session_state()
cm.add_subagent_output("run-1", "worker found the bug in parser.py line 42")
cm.report_usage(9000)
print(cm.handle_tool_call({"id": "c1", "type": "function", "function": {"name": "session_search", "arguments": json.dumps({"query": "error"})}})["content"][:200])
print(len(cm.records()), len(cm.history), cm.offloaded().keys())
cm2 = ContextManager(workspace=out, session_id="legacy-b", context_window=16000, agent_id="bob")
cm2.add({"role": "user", "content": "bob's secret plan: deploy on friday"})
cm2.add({"role": "assistant", "content": "noted"})
from contextfold.memory import MemoryStore
from contextfold.memory_extract import Fact
from contextfold.paths import Workspace
import inspect
print(inspect.signature(Fact))
MemoryStore(Workspace.at(out)).flush([Fact(kind="configuration", text="the database port is 5433 in staging", topic="config"), Fact(kind="requirement", text="all tests must pass before merging", topic="")])
