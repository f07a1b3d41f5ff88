"""``headroom demo`` — the main job on the embedded default: a local Kafka broker headroom starts itself."""
