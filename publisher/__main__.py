import sys

from publisher.cli import main

sys.exit(main())
