"""Settings every test shares."""

import os

# jsii warns on every start that Node 20 is past its end of life; the project pins Node 20 (the target machines').
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
