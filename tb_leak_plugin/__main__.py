"""``python -m tb_leak_plugin analyze LOGDIR``: same as the ``tb-leak`` command."""

import sys

from tb_leak_plugin.reporting.cli import main

sys.exit(main())
