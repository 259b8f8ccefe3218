from foliko_cli.cli.main import main

main()
