import sys

from bench.gpu_check.run import main

sys.exit(main())
