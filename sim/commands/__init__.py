"""One module per ``specsim`` subcommand; each exposes ``add_parser(subparsers)``."""
