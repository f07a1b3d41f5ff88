import subprocess
import sys
from pathlib import Path

import pytest

from headroom.sim import trace_files
from headroom.sim.traces import TraceError, TraceSettings, load_azure

ROOT = Path(__file__).resolve().parents[2]


def test_a_checkout_looks_beside_itself():
    assert trace_files.default_dir() == ROOT.parent / "shared" / "traces"


def test_missing_says_which_file_and_where_to_get_it(tmp_path):
    (tmp_path / "azure").mkdir()
    (tmp_path / "azure" / "AzureLLMInferenceTrace_conv_2023.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    assert trace_files.missing(tmp_path, "azure") is None
    message = trace_files.missing(tmp_path, "azure", "mooncake")
    assert str(tmp_path / "mooncake" / "mooncake_fast25_synthetic_trace.jsonl") in message
    assert "github.com/kvcache-ai/Mooncake" in message and "HEADROOM_TRACES_DIR" in message
    assert "AzureLLMInferenceTrace" not in message


def test_the_loaders_read_the_folder_of_the_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("HEADROOM_TRACES_DIR", str(tmp_path))
    with pytest.raises(TraceError, match="missing trace file"):
        load_azure(limit=1)
    (tmp_path / "azure").mkdir()
    (tmp_path / "azure" / "AzureLLMInferenceTrace_conv_2023.csv").write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,100,20\n")
    assert [r.prompt_tokens for r in load_azure(prefixes=None)] == [100]
    assert TraceSettings(tmp_path).path("azure").is_file()


def test_the_script_checks_before_anything_is_set_up(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "sim" / "trace_files.py"), "azure"], capture_output=True,
                          text=True, env={"HEADROOM_TRACES_DIR": str(tmp_path)}, timeout=30)
    assert done.returncode == 2 and "AzureLLMInferenceTrace_conv_2023.csv" in done.stderr
