import pytest

from headroom.router.control.headers import parse_headers
from headroom.router.control.metering import StreamMeter, meter_json
from headroom.router.control.prompt import read_body
from headroom.router.errors import RequestError


@pytest.mark.parametrize("body, chat, tokens, blocks", [
    pytest.param({"prompt": "a" * 130}, False, 33, 2, id="text-4-bytes-per-token"),
    pytest.param({"prompt": ["é" * 2]}, False, 1, 0, id="one-element-list-utf8"),
    pytest.param({"prompt": list(range(40))}, False, 40, 2, id="token-ids"),
    pytest.param({"messages": [{"role": "user", "content": "x" * 100}]}, True, 28, 1, id="chat"),
    pytest.param({"prompt": "hi", "headroom": {"prompt_tokens": 64, "hash_ids": [1, 2, 3, 4, 5]}}, False, 64, 4,
                 id="trace-extension"),
])
def test_read_body(body, chat, tokens, blocks):
    info = read_body(body, chat)
    assert info.prompt_tokens == tokens and len(info.block_hashes) == blocks


def test_shared_prefix_shares_hashes():
    a = read_body({"prompt": "s" * 128 + "question one"}, False).block_hashes
    b = read_body({"prompt": "s" * 128 + "another question"}, False).block_hashes
    assert a[:2] == b[:2]


@pytest.mark.parametrize("body, chat, message", [
    pytest.param([], False, "JSON object", id="not-object"),
    pytest.param({"prompt": 5}, False, "'prompt'", id="bad-prompt"),
    pytest.param({"messages": []}, True, "'messages'", id="empty-messages"),
    pytest.param({"prompt": "x", "max_tokens": -1}, False, "'max_tokens'", id="negative-max-tokens"),
    pytest.param({"prompt": "x", "stream": "yes"}, False, "'stream'", id="bad-stream"),
    pytest.param({"prompt": "x", "headroom": {"hash_ids": ["a"]}}, False, "hash_ids", id="bad-extension"),
])
def test_read_body_errors(body, chat, message):
    with pytest.raises(RequestError, match=message):
        read_body(body, chat)


@pytest.mark.parametrize("headers, field, value", [
    pytest.param({"X-SLO-TTFT-MS": "250"}, "slo_ttft_ms", 250.0, id="case-insensitive"),
    pytest.param({"x-llm-d-slo-tpot-ms": "20"}, "slo_tpot_ms", 20.0, id="llm-d-alias"),
    pytest.param({"x-slo-ttft-ms": "100", "x-llm-d-slo-ttft-ms": "100"}, "slo_ttft_ms", 100.0, id="agreeing-aliases"),
    pytest.param({"x-request-priority": "-3"}, "priority", -3, id="priority"),
    pytest.param({"x-request-priority": "+7"}, "priority", 7, id="signed-priority"),
    pytest.param({"x-prediction-based-scheduling": "TRUE"}, "opted_in", True, id="opt-in"),
    pytest.param({"x-prediction-based-scheduling-off": "true"}, "opted_out", True, id="opt-out"),
    pytest.param({"x-prediction-based-scheduling": "false"}, "opted_out", True, id="opt-in-false-opts-out"),
    pytest.param({"x-prediction-based-scheduling-off": "false"}, "opted_out", False, id="opt-out-false"),
    pytest.param({}, "opted_in", False, id="no-header"),
])
def test_headers(headers, field, value):
    assert getattr(parse_headers(headers), field) == value


@pytest.mark.parametrize("headers, message", [
    pytest.param({"x-slo-ttft-ms": "abc"}, "'x-slo-ttft-ms' must be a number", id="not-number"),
    pytest.param({"x-slo-tpot-ms": "0"}, "positive", id="zero"),
    pytest.param({"x-slo-tpot-ms": "inf"}, "up to 3600000", id="infinite"),
    pytest.param({"x-slo-tpot-ms": "nan"}, "up to 3600000", id="nan"),
    pytest.param({"x-slo-ttft-ms": "1e300"}, "up to 3600000", id="implausible"),
    pytest.param({"x-slo-ttft-ms": "100", "x-llm-d-slo-ttft-ms": "200"}, "disagree", id="conflicting-aliases"),
    pytest.param({"x-request-priority": "1.5"}, "integer", id="fractional-priority"),
    pytest.param({"x-request-priority": "1_0"}, "decimal integer, got '1_0'", id="underscored-priority"),
    pytest.param({"x-request-priority": "١"}, "decimal integer", id="non-ascii-digit-priority"),
    pytest.param({"x-request-priority": "9" * 30}, "decimal integer", id="huge-priority"),
    pytest.param({"x-request-id": "r" * 257}, "at most 256 characters", id="long-request-id"),
    pytest.param({"x-prediction-based-scheduling": "maybe"}, "true or false", id="bad-flag"),
])
def test_header_errors(headers, message):
    with pytest.raises(RequestError, match=message):
        parse_headers(headers)


def sse(payload):
    import json
    return f"data: {json.dumps(payload)}\n\n".encode()


def test_stream_meter_counts_tokens_not_chunks():
    meter = StreamMeter(dispatched=10.0)
    assert not meter.feed(sse({"choices": [{"delta": {"role": "assistant"}}]}), 10.05)  # no text yet
    assert not meter.feed(sse({"choices": [{"delta": {"content": "ab"}}]})[:10], 10.1)  # split across reads
    assert meter.feed(sse({"choices": [{"delta": {"content": "ab"}}]})[10:], 10.1)
    meter.feed(sse({"choices": [{"delta": {"content": "cdef"}}]}), 10.3)
    meter.feed(sse({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 5}}) + b"data: [DONE]\n\n", 10.31)
    done = meter.finish(10.32)
    assert done.output_tokens == 5 and done.prompt_tokens == 7
    assert done.ttft_ms == pytest.approx(100.0) and done.tpot_ms == pytest.approx(50.0)  # 200 ms over 4 tokens
    assert done.e2e_ms == pytest.approx(320.0)


def test_stream_meter_reads_events_ended_by_any_of_the_line_endings_sse_allows():
    meter = StreamMeter(dispatched=0.0)
    for t, end in ((0.1, b"\r\n\r\n"), (0.2, b"\r\r"), (0.3, b"\n\n")):
        event = sse({"choices": [{"text": "x"}]}).rstrip(b"\n") + end
        assert meter.feed(event[:-1], t) is False and meter.feed(event[-1:], t)  # complete only with its blank line
    done = meter.finish(0.4)
    assert done.output_tokens == 3 and done.tpot_ms == pytest.approx(100.0)


def test_stream_meter_without_usage_counts_text_chunks():
    meter = StreamMeter(dispatched=0.0)
    for t in (0.1, 0.2, 0.3):
        meter.feed(sse({"choices": [{"text": "x"}]}), t)
    done = meter.finish(0.4)
    assert done.output_tokens == 3 and done.tpot_ms == pytest.approx(100.0)


def test_meter_json():
    done = meter_json(b'{"usage": {"prompt_tokens": 3, "completion_tokens": 9}}', 1.0, 1.5)
    assert (done.e2e_ms, done.output_tokens, done.prompt_tokens, done.ttft_ms) == (500.0, 9, 3, None)


@pytest.mark.parametrize("chunk, text", [
    pytest.param({"choices": [{"delta": "not an object", "text": "x"}]}, True, id="odd-delta-read-plainly"),
    pytest.param({"choices": [{"text": 5}], "usage": {"completion_tokens": 2}}, False, id="odd-text"),
    pytest.param({"choices": "none", "usage": {"completion_tokens": 2}}, False, id="odd-choices"),
    pytest.param({"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"content": "hi"}, "logprobs": None}]},
                 True, id="unread-fields"),
])
def test_stream_meter_reads_chunks_of_unexpected_shapes(chunk, text):
    meter = StreamMeter(dispatched=0.0)
    assert meter.feed(sse(chunk), 0.1) is text
    assert meter.usage == chunk.get("usage")


@pytest.mark.parametrize("body, tokens", [(b'{"usage": "odd"}', 0), (b"[1]", 0),
                                          (b'{"choices": [], "usage": {"completion_tokens": 4}}', 4)])
def test_meter_json_tolerates_odd_bodies(body, tokens):
    assert meter_json(body, 0.0, 1.0).output_tokens == tokens


@pytest.mark.parametrize("body", [b"not json", b'{"choices": [{"text": "cut sh', b"", b'{"usage": {}} trailing'])
def test_meter_json_finds_no_completion_in_a_body_that_is_not_one_whole_document(body):
    assert meter_json(body, 0.0, 1.0) is None


def test_stream_meter_knows_a_whole_stream_by_its_done_event():
    meter = StreamMeter(dispatched=0.0)
    meter.feed(sse({"choices": [{"text": "x"}]}) + b'data: {"choi', 0.1)
    assert not meter.done and meter.partial
    meter.feed(b'ces": []}\n\ndata: [DONE]\n\n', 0.2)
    assert meter.done and not meter.partial


def test_media_parts_are_the_encoder_input_counted_once_each():
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    audio = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "compare"}, image, audio]},
                {"role": "user", "content": [image]}]
    info = read_body({"messages": messages}, chat=True)
    assert info.encoder_input_size == 2 and len(set(info.media_hashes)) == 2
    assert read_body({"messages": [{"role": "user", "content": "text only"}]}, chat=True).encoder_input_size == 0
    assert read_body({"prompt": "hi"}, chat=False).media_hashes == ()
