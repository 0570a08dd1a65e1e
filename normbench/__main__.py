from normbench.cli.main import cli

cli()
