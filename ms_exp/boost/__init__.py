"""The ``boost`` group: mindspore.boost algorithms (dimension-reduction training)."""
