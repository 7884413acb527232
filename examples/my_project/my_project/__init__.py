"""A user's MindSpore project trained through ms_exp: its own network, data and callback."""
