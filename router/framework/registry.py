"""Every built-in plugin, by type name: one line each. A factory takes ``(name, raw_params)``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from headroom.router.framework.plugins import (
                            kv_cache_free_scorer,
                            late_concentration_filter,
                            latency_scorer,
                            latency_slo_admitter,
                            max_score_picker,
                            predicted_latency_producer,
                            prefix_cache_affinity_filter,
                            prefix_match_scorer,
                            queue_scorer,
                            slo_headroom_tier_filter,
                            tpot_protection_filter,
                            weighted_random_picker,
)

Factory = Callable[[str, Mapping[str, Any] | None], Any]

REGISTRY: dict[str, Factory] = {
    predicted_latency_producer.TYPE: predicted_latency_producer.build,
    prefix_cache_affinity_filter.TYPE: prefix_cache_affinity_filter.build,
    slo_headroom_tier_filter.TYPE: slo_headroom_tier_filter.build,
    tpot_protection_filter.TYPE: tpot_protection_filter.build,
    late_concentration_filter.TYPE: late_concentration_filter.build,
    latency_scorer.TYPE: latency_scorer.build,
    latency_slo_admitter.TYPE: latency_slo_admitter.build,
    weighted_random_picker.TYPE: weighted_random_picker.build,
    max_score_picker.TYPE: max_score_picker.build,
    kv_cache_free_scorer.TYPE: kv_cache_free_scorer.build,
    queue_scorer.TYPE: queue_scorer.build,
    prefix_match_scorer.TYPE: prefix_match_scorer.build,
}
