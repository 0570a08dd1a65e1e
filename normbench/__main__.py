from normbench.cli import cli

cli()
