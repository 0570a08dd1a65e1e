from normbench.cli import main

main()
