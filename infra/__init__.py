"""The Pulumi program of tf-distributed: typed config, components, and an offline renderer."""
