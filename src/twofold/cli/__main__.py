from twofold.cli.main import main

main()
