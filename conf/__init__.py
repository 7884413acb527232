"""ms_exp's config folder, shipped in the wheel as the package ``ms_exp.conf`` (pyproject.toml).

A package, not only a folder, so that ``pkg://ms_exp.conf`` on a Hydra search path finds it
in an editable install too (setuptools maps the package to this folder).
"""
