from recalld.entry import main

main()
