from greenadapt.cli import main

main()
