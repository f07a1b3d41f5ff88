"""Serving model-update files without a broker: a folder or one file, changes picked up, bad files refused."""

import os

import grpc
import pytest

from headroom.contract.model_update import decode_update
from headroom.contract.signing import SigningKey, TrustedKeys
from headroom.model_files import file_name, model_paths, write_model_file
from headroom.predictor.file_source import ModelFileSource
from headroom.predictor.proto import prediction_pb2_grpc
from headroom.predictor.runtime import ApplyOutcome, ModelRuntime
from tests.keys import TEST_KEY, TRUST
from tests.predictor.models import message, train
from tests.predictor.test_service import request


@pytest.fixture(scope="module")
def boosters():
    return {"ttft": train(seed=1), "tpot": train("tpot", seed=2)}


def write(folder, raw: bytes):
    return write_model_file(folder, decode_update(raw, TRUST), raw)


def outcomes(results):
    return [(r.key, r.version, r.outcome) for r in results]


def test_a_folder_is_read_and_changed_files_are_read_again(tmp_path, boosters):
    runtime = ModelRuntime(trust=TRUST)
    write(tmp_path, message(boosters["ttft"], 1))
    write(tmp_path, message(boosters["tpot"], 1, target="tpot"))
    (tmp_path / "notes.txt").write_text("not a model")
    source = ModelFileSource(runtime, tmp_path)
    assert outcomes(source.scan()) == [("pool-a/tpot/mean", 1, ApplyOutcome.APPLIED),
                                       ("pool-a/ttft/mean", 1, ApplyOutcome.APPLIED)]
    assert source.scan() == []  # nothing changed
    path = write(tmp_path, message(boosters["ttft"], 2))
    assert path.name == file_name("pool-a/ttft/mean") == "pool-a%2Fttft%2Fmean.hrmu"
    assert outcomes(source.scan()) == [("pool-a/ttft/mean", 2, ApplyOutcome.APPLIED)]
    assert runtime.version("pool-a", "ttft", "mean") == 2


def test_a_tampered_file_is_refused_and_the_live_version_keeps_serving(tmp_path, boosters):
    runtime = ModelRuntime(trust=TRUST)
    source = ModelFileSource(runtime, tmp_path)
    write(tmp_path, message(boosters["ttft"], 1))
    source.scan()
    raw = bytearray(message(boosters["ttft"], 2))
    raw[-10] ^= 0xFF
    target = tmp_path / file_name("pool-a/ttft/mean")
    target.write_bytes(bytes(raw))
    os.utime(target, ns=(1, 1))
    [result] = source.scan()
    assert (result.outcome, result.reason) == (ApplyOutcome.REJECTED, "bad-signature")
    assert runtime.version("pool-a", "ttft", "mean") == 1 and runtime.rejected["bad-signature"] == 1


def test_unsigned_and_foreign_files_are_refused_unless_unsigned_ones_are_allowed(tmp_path, boosters):
    (tmp_path / "unsigned.hrmu").write_bytes(message(boosters["ttft"], 1, key=None))
    (tmp_path / "foreign.hrmu").write_bytes(message(boosters["tpot"], 1, target="tpot", key=SigningKey.generate()))
    runtime = ModelRuntime(trust=TRUST)
    assert [(r.outcome, r.reason) for r in ModelFileSource(runtime, tmp_path).scan()] == [
        (ApplyOutcome.REJECTED, "unknown-key"), (ApplyOutcome.REJECTED, "unsigned")]
    assert not runtime.ready
    lenient = ModelRuntime(trust=TrustedKeys([TEST_KEY.public_key], allow_unsigned=True))  # HEADROOM_MODEL_ALLOW_UNSIGNED
    assert [r.outcome for r in ModelFileSource(lenient, tmp_path).scan()] == [ApplyOutcome.REJECTED,
                                                                              ApplyOutcome.APPLIED]
    assert lenient.version("pool-a", "ttft", "mean") == 1


def test_one_file_of_any_name_and_a_missing_path(tmp_path, boosters):
    single = tmp_path / "ttft-model.bin"
    single.write_bytes(message(boosters["ttft"], 3))
    assert model_paths(single) == [single]
    runtime = ModelRuntime(trust=TRUST)
    assert outcomes(ModelFileSource(runtime, single).scan()) == [("pool-a/ttft/mean", 3, ApplyOutcome.APPLIED)]
    with pytest.raises(FileNotFoundError, match="no model file or folder"):
        ModelFileSource(runtime, tmp_path / "nowhere")


def test_a_server_serves_model_files_without_a_broker(start_server, boosters, tmp_path):
    write(tmp_path, message(boosters["ttft"], 1))
    server = start_server(models=str(tmp_path), models_poll_s=0.05)
    assert server.tailer is None and server.files is not None
    for _ in range(100):
        if server.ready:
            break
        server.wait(0.05)
    assert server.ready
    with grpc.insecure_channel(server.address) as channel:
        stub = prediction_pb2_grpc.PredictionServiceStub(channel)
        assert stub.Predict(request(), timeout=5).predictions[0].version == 1
        write(tmp_path, message(boosters["ttft"], 2))
        for _ in range(100):
            if stub.Predict(request(), timeout=5).predictions[0].version == 2:
                break
            server.wait(0.05)
        assert stub.Predict(request(), timeout=5).predictions[0].version == 2
