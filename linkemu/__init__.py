"""linkemu: a dynamic link emulator (Open vSwitch router via os-ken rest_router + Linux tc)."""
