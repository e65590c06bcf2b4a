# Tests of the simulated GPU driver.
