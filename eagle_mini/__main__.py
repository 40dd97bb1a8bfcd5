import sys

from eagle_mini.cli import main

sys.exit(main())
