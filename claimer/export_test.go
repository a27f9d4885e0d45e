package claimer

// SQLClaimIDDirect is the claim by id that direct connections send.
const SQLClaimIDDirect = sqlClaimIDDirect
