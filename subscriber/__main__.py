import sys

from subscriber.cli import main

sys.exit(main())
