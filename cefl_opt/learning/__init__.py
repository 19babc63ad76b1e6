"""The torch trainer of CE-FL (SPEC §7)."""
