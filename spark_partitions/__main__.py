"""``python -m spark_partitions``."""

import sys

from spark_partitions.cli import main

sys.exit(main())
