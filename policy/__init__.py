"""The tf-distributed policy pack: ``pulumi preview --policy-pack policy``."""
