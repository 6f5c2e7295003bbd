/// <reference path="../../../sandbox/tally.d.ts" />
// Look up a wallet by its code: its id, name and available balance (settled + pending holds).

const ACCOUNT = `query($code: String!) { account(code: $code) { accountId code name
  balance(currency: "USD") { available(layer: PENDING) { normalBalance { units } } } } }`;

function run(event) {
  const account = graphql(ACCOUNT, { code: event.data.code }).account;
  return {
    account_id: account.accountId,
    code: account.code,
    name: account.name,
    available: decimal(account.balance.available.normalBalance.units).toFixed(2),
  };
}
