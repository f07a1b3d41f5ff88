"""What the router knows about its servers: scraped metrics, its own in-flight accounting, a prefix index."""
