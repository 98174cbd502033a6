"""fp4-scaling: scaling-law studies of FP4 LLM pretraining recipes.

Importing this package is cheap and torch-free (fits/ and reports/ rely on that);
import the submodules you need, e.g. ``from scaling.quant import QuantSpec``.
"""

__version__ = "0.1.0"
