from tooldec.cli import main

main()
