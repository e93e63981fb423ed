"""Array type aliases shared by every solver module.

They live in their own module, below everything else, so that ``rotations`` (which ``limits`` uses) and
``types`` (which uses ``limits``) can share them without importing each other: the import graph of
``solvers/`` stays acyclic.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
"""Array of float64, the only float type used inside the solvers."""
I64 = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]
I8 = npt.NDArray[np.int8]
