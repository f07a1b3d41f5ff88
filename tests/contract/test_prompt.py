from headroom.contract.prompt import BLOCK_TOKENS, chat_text, count_tokens, text_block_hashes, token_block_hashes


def test_text_is_four_bytes_a_token_rounded_up():
    assert [count_tokens(t) for t in ("", "abc", "abcd", "abcde", "é" * 4)] == [1, 1, 1, 2, 2]


def test_hashes_chain_so_equal_leading_hashes_mean_equal_prefixes():
    base = list(range(5 * BLOCK_TOKENS))
    changed_third_block = base[:2 * BLOCK_TOKENS] + [-1] + base[2 * BLOCK_TOKENS + 1:]
    a, b = token_block_hashes(base), token_block_hashes(changed_third_block)
    assert len(a) == 5 and a[:2] == b[:2] and all(x != y for x, y in zip(a[2:], b[2:]))
    assert token_block_hashes(base[:BLOCK_TOKENS - 1]) == ()


def test_text_blocks_are_64_bytes_and_chat_is_text():
    text = "x" * 64 * 3 + "tail"
    assert len(text_block_hashes(text)) == 3
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert chat_text(messages) == "<|system|>\nbe brief\n<|user|>\nhi\n"
