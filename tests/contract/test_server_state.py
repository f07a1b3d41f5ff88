"""The one rule for a server's encoder match against the request's encoder input, as every API applies it."""

import numpy as np
import pytest

from headroom.contract.server_state import encoder_excess


@pytest.mark.parametrize(("matched", "input_size", "excess"), [
    pytest.param(0, 0, {}, id="text-only"),
    pytest.param(3, 3, {}, id="all-matched"),
    pytest.param(4, 3, {0: "encoder_matched_size 4 exceeds encoder_input_size 3"}, id="one-record"),
    pytest.param(np.array([0.0, 5.0, 2.0, 9.0]), np.array([1.0, 4.0, 2.0, 8.5]),
                 {1: "encoder_matched_size 5 exceeds encoder_input_size 4",
                  3: "encoder_matched_size 9 exceeds encoder_input_size 8.5"}, id="columns"),
    pytest.param(np.array([1.0, 3.0]), np.array([2.0]), {1: "encoder_matched_size 3 exceeds encoder_input_size 2"},
                 id="one-input-for-every-row"),
    pytest.param(np.array([2e9]), 1e9, {0: "encoder_matched_size 2000000000 exceeds encoder_input_size 1000000000"},
                 id="large-counts-in-full"),
])
def test_encoder_excess_names_each_row_whose_match_exceeds_the_input(matched, input_size, excess):
    assert encoder_excess(matched, input_size) == excess
