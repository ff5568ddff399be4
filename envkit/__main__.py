from envkit.cli import main

raise SystemExit(main())
