from nestednet.cli import main

main()
