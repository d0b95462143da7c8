"""`python -m workbench …` is the `workbench` command."""

import sys

from .cli import main

sys.exit(main())
