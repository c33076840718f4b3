import sys

from axon.cli import main

sys.exit(main())
