import sys

from channel_server.cli import main

sys.exit(main())
