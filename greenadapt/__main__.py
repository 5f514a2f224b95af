from greenadapt.cli import entry_point

entry_point()
