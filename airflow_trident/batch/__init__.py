"""The batch lifecycle: what happens to one batch, from begin to success (see ``steps``)."""
