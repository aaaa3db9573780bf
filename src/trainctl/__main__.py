from trainctl.cli.main import main

main()
