from gnnpipe.bench.cli import main
import sys
sys.exit(main())
