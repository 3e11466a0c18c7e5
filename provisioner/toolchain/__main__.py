import sys

from provisioner.toolchain.installer import main

sys.exit(main())
