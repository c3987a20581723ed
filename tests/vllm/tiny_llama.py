"""The tests' tiny Llama: examples/vllm/tiny_model.py (user-facing, the
README's quick start makes its model with it), imported from there."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples", "vllm"))
from tiny_model import CONFIG, write  # noqa: E402,F401
