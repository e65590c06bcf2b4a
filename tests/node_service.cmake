# End-to-end tests of gpufracd and the gpufrac commands that talk to it.
