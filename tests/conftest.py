"""Shared pytest configuration: hypothesis profiles.

`default` keeps local runs fast; `ci` runs more examples. Select one with the
`HYPOTHESIS_PROFILE` environment variable. Neither has a deadline: timing on a loaded 2-core
machine is not a correctness signal.
"""

import os

from hypothesis import settings

settings.register_profile("default", deadline=None)
settings.register_profile("ci", deadline=None, max_examples=500, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
