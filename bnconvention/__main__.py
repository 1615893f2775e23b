from bnconvention.cli.main import main

raise SystemExit(main())
