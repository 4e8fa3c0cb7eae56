"""toolgate: the module code in a toolgate session imports to reach the service that runs it
(nothing public yet). The runtime's own code is in the private modules of this package."""
