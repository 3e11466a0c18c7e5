from provisioner.commands.cli import main

raise SystemExit(main())
